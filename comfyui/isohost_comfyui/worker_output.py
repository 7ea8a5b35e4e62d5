"""An isolated pack's print and logging in ComfyUI's own log: each line a worker writes to its
stdout or stderr is written to ComfyUI's sys.stdout or sys.stderr, which ComfyUI's logger
(app/logger.py) keeps for GET /internal/logs and the front end's log panel, as a pack's output in
process is; after its environment's name in brackets, so a reader sees where it came from
(docs/comfyui.md, "Output and logs")."""

import re
import sys

# SGR sequences (colours, bold, reset) pass as in process, where ComfyUI's terminal and the front
# end's log panel render them. Any other control character (cursor movement, a title, a bell,
# NUL, C1) is shown as \xNN, as isohost's own log shows it: a worker's line cannot move the
# cursor or clear the screen of ComfyUI's terminal.
_CONTROL = re.compile(r"(\x1b\[[0-9;]*m)|[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def write(line):
    """isohost.Host's on_output handler, on its thread "isohost-output": `line` (an
    isohost.OutputLine) on ComfyUI's stream of the same name, whole, flushed as a terminal's
    line is."""
    stream = sys.stderr if line.stream == "stderr" else sys.stdout
    if stream is None:
        return  # a process without a console (pythonw)
    stream.write("[%s] %s\n" % (line.env, shown(line.text)))
    stream.flush()


def shown(text):
    """`text` as a terminal leaves it: what a carriage return wrote over (a progress bar's
    earlier states) left out, control characters other than tab and colours escaped."""
    text = next((part for part in reversed(text.split("\r")) if part), "")
    return _CONTROL.sub(lambda m: m.group(1) or "\\x%02x" % ord(m.group(0)), text)
