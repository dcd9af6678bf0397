"""Evaluation harness: ``rpent eval`` (also ``python -m rpent.eval``). See :mod:`.cli`."""
