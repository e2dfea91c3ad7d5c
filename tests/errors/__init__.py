"""Bad input and broken environments: a clear error each, and no harm to later runs (README.md lists every
case and the test that covers it)."""
