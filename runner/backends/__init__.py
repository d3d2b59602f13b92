"""Backends: every device decision behind one interface (`runner.backends.base.Backend`).

This module imports nothing, so config validation imports the torch-free `cores` without loading a device library.
"""
