"""`igw`: the command-line entry point and the front ends' commands."""
