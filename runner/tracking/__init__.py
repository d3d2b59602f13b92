"""Where a job's results go and how a reader finds them: MLflow's runs, store and UI links, git checkouts."""
