"""The event layer: SimPy processes that schedule the cost layer's numbers."""
