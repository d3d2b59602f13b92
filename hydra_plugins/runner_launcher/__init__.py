"""The runner's Hydra launcher (hydra/launcher=isolated, hydra/launcher=parallel)."""
