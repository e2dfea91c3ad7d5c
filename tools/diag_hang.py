"""Runs a script and dumps every Python thread's stack every N seconds (finding where a run hangs).

    python tools/diag_hang.py SECONDS script.py [args...]
"""

import faulthandler
import runpy
import sys

faulthandler.dump_traceback_later(float(sys.argv[1]), repeat=True)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
