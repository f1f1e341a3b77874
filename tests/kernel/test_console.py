"""`jupyter console --kernel nabla` driven through tmux: type a multi-line
function, Tab-complete a name, and see the result.  SKIPs when jupyter-console
or tmux is not installed (apt install jupyter-console tmux)."""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402
from kutil import SLOW, TMP, result  # noqa: E402

NAME = "jupyter console: multi-line function, Tab completion, result"


def have_console():
    r = subprocess.run([sys.executable, "-c", "import jupyter_console"], capture_output=True)
    return r.returncode == 0


if not shutil.which("tmux"):
    result(NAME, None, "tmux is not installed")
    kutil.finish()
if not have_console():
    result(NAME, None, "jupyter-console is not installed (apt install jupyter-console)")
    kutil.finish()

kutil.install("nabla")
sock = os.path.join(TMP, "tmux.sock")
session = "nabla-console"


def tmux(*args, check=True):
    return subprocess.run(["tmux", "-S", sock, *args], capture_output=True, text=True, timeout=10, check=check)


def screen():
    return tmux("capture-pane", "-p", "-t", session, "-S", "-200").stdout


def wait_for(text, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = screen()
        if text in s:
            return s
        time.sleep(0.1)
    open(os.environ.get("CONSOLE_SCREEN", os.devnull), "w").write(screen())
    raise AssertionError(f"timed out waiting for {text!r}; screen:\n{screen()}")


def main():
    env = dict(os.environ, TERM="xterm-256color", HOME=TMP, PYTHONWARNINGS="ignore")
    cmd = f"{sys.executable} -m jupyter_console --kernel nabla"
    # a plain shell in the pane first so its environment is ours
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-s", session, "-x", "120", "-y", "40",
                    "env " + " ".join(f"{k}='{v}'" for k, v in env.items() if k in
                                      ("JUPYTER_PATH", "JUPYTER_RUNTIME_DIR", "NABLA_HISTORY_FILE", "HOME", "TERM",
                                       "PYTHONWARNINGS", "NO_COLOR")) + " " + cmd],
                   check=True, timeout=10, env=env)
    try:
        s = wait_for("In [1]", 30 * SLOW)
        time.sleep(0.5)
        if "Press ENTER to continue" in screen():
            # jupyter-console 6.4.4 on Python 3.11 reports a harmless asyncio
            # context error of its own at start-up (not the kernel's doing)
            print("note: jupyter-console printed its asyncio start-up error; continuing", flush=True)
            tmux("send-keys", "-t", session, "Enter")
            time.sleep(0.5)
        # a multi-line function: the console asks is_complete after each line
        tmux("send-keys", "-t", session, "-l", "fn triple_it(x) {")
        tmux("send-keys", "-t", session, "Enter")
        wait_for("...:", 10 * SLOW)
        tmux("send-keys", "-t", session, "-l", "x * 3")
        tmux("send-keys", "-t", session, "Enter")
        time.sleep(0.3)
        tmux("send-keys", "-t", session, "-l", "}")
        time.sleep(0.2)
        tmux("send-keys", "-t", session, "Enter")
        wait_for("In [2]", 10 * SLOW)
        # Tab completion of the new name
        tmux("send-keys", "-t", session, "-l", "trip")
        time.sleep(0.2)
        tmux("send-keys", "-t", session, "Tab")
        s = wait_for("In [2]: triple_it", 10 * SLOW)
        tmux("send-keys", "-t", session, "-l", "(14)")
        time.sleep(0.2)
        tmux("send-keys", "-t", session, "Enter")
        s = wait_for("Out[2]: 42", 10 * SLOW)
        if "Out[" not in s:
            return f"no Out[] prompt:\n{s}"
        return None
    finally:
        tmux("send-keys", "-t", session, "C-d", check=False)
        time.sleep(0.3)
        tmux("send-keys", "-t", session, "y", "Enter", check=False)
        time.sleep(0.5)
        tmux("kill-server", check=False)


try:
    why = main()
    result(NAME, why is None, why or "")
except Exception as e:
    result(NAME, False, f"{type(e).__name__}: {e}")
kutil.finish()
