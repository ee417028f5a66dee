"""benchmarks/RESULTS.md is shared by several scripts: each owns one section between
``<!-- BEGIN name -->`` and ``<!-- END name -->`` and rewrites only that."""
from __future__ import annotations

import os


def write_section(path: str, name: str, text: str) -> None:
    """Replace the text between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` in ``path``
    (appending the markers and the text if absent); the rest of the file is kept."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    old = open(path).read() if os.path.exists(path) else ""
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + block + rest.split(end, 1)[1]
    else:
        new = old.rstrip() + ("\n\n" if old.strip() else "") + block + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(new)


def date_and_machine(executor: str = "driver executor") -> str:
    """The first line of a section: the time now, the machine, Python, and where the steps ran."""
    import platform
    import time
    return (f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs, "
            f"{platform.system()} {platform.machine()}, Python {platform.python_version()}; {executor}.")
