"""Integrations with other evaluation frameworks; each module imports its framework (nothing here does).

* :mod:`brrm.integrations.inspect` — inspect_ai scorers over a brrm judge (``pip install -e '.[inspect]'`` in the
  clone).
"""
