#!/usr/bin/env python3
"""Write the skim decoders generated ahead of time (kdissect/protocol/_generated/skims.py).

Usage:
    python3 tools/gen_skims.py [--out FILE]

The skims of `kdissect.protocol.skim_code.AHEAD_APIS` (every defined version,
with its usual header) are written as a module that mypyc compiles (it is
in `kdissect.native.NATIVE_MODULES`); the other layouts are generated when
first met. Run it after tools/gen_protocol.py (the skims follow the tables
it writes) and after any change to the skim's or the generator's code:
tests/protocol/test_skim.py checks the committed module is current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kdissect.protocol.skim_code import ahead_of_time_module  # noqa: E402
from kdissect.shared.atomic import write_atomically  # noqa: E402

DEFAULT_OUT = REPO / "kdissect" / "protocol" / "_generated" / "skims.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the module")
    args = parser.parse_args(argv)
    write_atomically(args.out, ahead_of_time_module())  # the package imports it: never half a module
    print(f"gen_skims: wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
