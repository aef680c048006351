"""The cost layer: small pure functions of plain dataclasses; no SimPy here.

It is also the closed-form oracle the event layer is tested against.
"""
