"""``python -m sqlengine``: the command line (``sqlengine --help``)."""
from .cli import main

main(prog_name="sqlengine")
