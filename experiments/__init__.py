"""Experiments: YAML sweeps over scenarios, their runner, plots, reports and the CI regression check."""
