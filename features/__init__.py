"""The Gherkin scenarios, one directory per subject; features/conftest.py says how they are run."""
