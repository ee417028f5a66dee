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


def test_connector_examples(capsys):
    """The examples of the built-in connectors that need no outside system (Kafka's run in test_kafka)."""
    for marker, expect in [('"name": "file_input"', "['2024-06-01.csv', '2024-06-02.csv'] 1"),
                           ('"name": "datagen", "config": config', "'rows': 100000"),
                           ('"name": "nexmark", "config"', "'category': 10"),
                           ('"mode": "snapshot"}},\n     "format": {"name": "csv"}}])', "step-")]:
        (block,) = python_blocks(marker)
        exec(compile(block, "README.md", "exec"), {})
        out = capsys.readouterr().out
        assert expect in out, (marker, out[-2000:])
