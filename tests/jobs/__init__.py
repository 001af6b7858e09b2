"""Small real training and utility scripts the executor tests run as jobs."""
