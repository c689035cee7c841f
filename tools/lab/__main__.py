"""`python3 -m tools.lab ...` from the repository root: see tools/lab/recipe.py."""

import sys

from tools.lab.recipe import main

sys.exit(main())
