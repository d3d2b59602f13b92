"""Reports: the console summary, reading runs back from MLflow, the comparison's plots."""
