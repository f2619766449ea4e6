"""The exporter's flags as data: one row per flag (table.py), and what is made from the rows: the
argparse parser, the environment, the config file and the docs' flag table."""
