"""The README's examples run as written."""
import os
import re

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def python_blocks(containing: str):
    text = open(README).read()
    return [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if containing in b]


def test_custom_source_example(capsys):
    (block,) = python_blocks("class Countdown")
    exec(compile(block, "README.md", "exec"), {})
    assert "[{'total': 6}]" in capsys.readouterr().out
