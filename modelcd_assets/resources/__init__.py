"""ConfigurableResource classes; they are bound in defs/resources.py."""
