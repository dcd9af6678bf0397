"""Simulated robot nodes implementing the RPent robot contract."""
