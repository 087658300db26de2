"""cli/interrupts.py: a Ctrl-C where a library would swallow it waits for the end of the import, or for the job's
config, and then ends the command in one line (tests/e2e/test_ctrl_c_at_any_moment.py: the entry scripts)."""

from __future__ import annotations

from tests.helpers import ROOT, cli

START = "import os, signal, sys, time; sys.path.insert(0, sys.argv[1]); import cli.entry\n"


def test_a_ctrl_c_inside_an_import_waits_for_the_import_to_end(tmp_path):
    """The import runs whole (what runs an import may swallow a KeyboardInterrupt, or leave a module half made);
    the Ctrl-C ends the command as soon as it is over, before the next line has slept."""
    (tmp_path / "slow_module.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.2)\nprint('imported whole')\n"
    )
    code = START + "sys.path.insert(0, sys.argv[2])\nimport slow_module\ntime.sleep(30)\nprint('went on')\n"
    r = cli("-c", code, str(ROOT), str(tmp_path))
    assert (r.returncode, r.stdout, r.stderr) == (130, "imported whole\n", "interrupted\n"), r.stderr


def test_a_ctrl_c_while_held_is_raised_on_release():
    code = START + (
        "from cli.interrupts import held, release\n"
        "with held():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.1)\n"
        "    print('held', flush=True)\n"
        "    release()\n"
        "    print('went on')\n"
    )
    r = cli("-c", code, str(ROOT))
    assert (r.returncode, r.stdout, r.stderr) == (130, "held\n", "interrupted\n"), r.stderr
