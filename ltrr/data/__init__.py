"""Datasets: the table schemas, reading and writing them, the embedded demo and its builders.

The ground of the data floor: it imports only `ltrr._errors` and `ltrr._tables`. Import the
modules themselves (`ltrr.data.io`, `ltrr.data.schema`, ...); this package re-exports nothing,
so importing it stays free. It is a regular package (not a namespace one) so that the packaging
(``packages = find:``) ships it and import-linter sees it.
"""
