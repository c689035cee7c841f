"""Regenerate the README's screenshot (docs/report.png) from the current
report of the bundled captures:

    python tools/report_screenshot.py            # report of captures/, then the shot
    python tools/report_screenshot.py PAGE.html  # the shot of a page already made

Headless Chromium draws the page at 1000 x 3400 CSS pixels (the top of the
page: the findings and the first charts); the PNG is quantized to 128
colours so it stays well under the 500 KB the README's test allows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHOT = REPO / "docs" / "report.png"
WIDTH, HEIGHT, COLOURS = 1000, 3400, 128


def make_page(folder: Path) -> Path:
    """`kdissect report captures -o PAGE`, with the captures' TLS key logs."""
    page = folder / "report.html"
    keylogs = sorted((REPO / "captures" / "tls").glob("*.keys"))
    argv = [sys.executable, "-m", "kdissect", "report", str(REPO / "captures"), "-o", str(page), "-q"]
    for keylog in keylogs:
        argv += ["--tls-keylog", str(keylog)]
    subprocess.run(argv, cwd=REPO, check=True)
    return page


def shoot(page: Path, target: Path) -> None:
    from PIL import Image

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("report_screenshot: chromium is not installed (tools/setup.sh installs it)")
    with tempfile.TemporaryDirectory() as folder:
        raw = Path(folder) / "raw.png"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={raw}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=300)
        image = Image.open(raw).convert("RGB").quantize(colors=COLOURS)
        partial = target.with_name(target.name + ".part")
        image.save(partial, optimize=True)
        os.replace(partial, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", nargs="?", type=Path, help="a report page already made (default: make one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        page = args.page or make_page(Path(folder))
        shoot(page, SHOT)
    print(f"{SHOT.relative_to(REPO)}: {SHOT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
