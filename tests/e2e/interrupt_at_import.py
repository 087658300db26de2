"""Run an entry script that sends itself SIGINT as the import of one module begins:
`python tests/e2e/interrupt_at_import.py <module> <script> [overrides]`.

A Ctrl-C at an exact moment of the start-up instead of after a guessed delay: numpy's import, for one, runs inside
torch's C++ start-up, which goes on without numpy when that import fails. The signal is sent from the first finder
on sys.meta_path when it is asked for <module>; it then steps aside and the usual finders import the module.
"""

import os
import runpy
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
module, script = sys.argv.pop(1), str(ROOT / sys.argv.pop(1))


class InterruptAtImport:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, InterruptAtImport())
sys.argv[0], sys.path[0] = script, str(ROOT)  # as `python <script>` has them
runpy.run_path(script, run_name="__main__")
