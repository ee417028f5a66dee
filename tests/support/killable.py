"""Running a test module in a child process that may be SIGKILLed (the crash tests' children)."""
import os
import signal
import subprocess
import sys
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_module(module: str, args: List[str], kill_after: Optional[float] = None, timeout: float = 120) -> int:
    """``python -m module args...`` from the repository root; with ``kill_after`` seconds, SIGKILL it then
    (if it is still running).  Returns its exit code (-9 if killed); a run that was not to be killed and
    failed raises with the end of its output."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        if kill_after is not None:
            try:
                proc.wait(timeout=kill_after)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
        out_text = proc.communicate(timeout=timeout)[0].decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if kill_after is None and proc.returncode != 0:
        raise AssertionError(f"{module} failed ({proc.returncode}):\n{out_text[-3000:]}")
    return proc.returncode
