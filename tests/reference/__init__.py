"""Independent plain-Python reference model of HackMatrix, for differential tests."""
