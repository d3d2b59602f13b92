"""`python -m runner.doctor`: check on this host every assumption the runner makes about it.

The host table says what is installed and usable; on a Neuron or CUDA host, one probe per
assumption runs the runner's own backend code in a fresh process and reports PASS, FAIL or
UNKNOWN with its evidence, and for a FAIL the config key or code path it affects.
"""
