"""Kept for old habits: the zoo's tables are derived by ``scalebench layers --zoo`` (real/zoo_tables.py).

    python scripts/derive_layer_tables.py [NAME ...] [--check]   ==   scalebench layers --zoo [NAME ...] [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scalebench.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(["layers", "--zoo", *sys.argv[1:]]))
