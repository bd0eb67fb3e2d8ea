"""The course's other-language editions, built from the English sources and a prose catalogue.

``catalog`` holds the catalogue FORMAT (read its docstring first) and
extract/update; ``build`` writes the Chinese notebooks.  Command line:
``python -m allocator_ref.editions --help``.
"""
