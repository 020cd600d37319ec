"""manifest layer."""
