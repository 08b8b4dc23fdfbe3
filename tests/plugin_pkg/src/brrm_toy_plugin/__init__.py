"""A plugin package for brrm, as another project would ship it: a model kind (``toylen``, :mod:`.kind`), a backend
(``toytok``, :mod:`.backend`) and a benchmark (``toybench``, :mod:`.bench`), each one module exporting its one entry,
registered through the entry points of ``brrm_toy_plugin-0.1.dist-info/entry_points.txt`` (what pip writes from a
``[project.entry-points."brrm.kinds"]`` table). The tests put this folder on ``sys.path``."""
