"""sqllogictest (.test) files and a runner that checks the engine against them.

``parse.py`` and the ``*.test`` files are copies (see the header of ``parse.py`` and the
provenance note in ``runner.py``); ``runner.py`` runs the records through ``sqlengine.Pipeline``.
"""
