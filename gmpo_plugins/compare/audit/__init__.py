"""``gmpo-plugins audit``: each framework's own implementation of each registry loss, called
through the framework's own call site and config object, held against the registry.

translations.py   data: per framework and registry loss, the framework's call and config
                  fields that express the registry's setting ("not shipped" when absent)
conventions.py    data: the named conventions a framework's result may differ by
batches.py        the float64 hard batches and the splits (micro-batches, ranks) checked
callers/          one module per framework: one micro-batch through its call site, scaled
                  as its trainer scales it
verdict.py        loss and gradient against the registry, split behaviour, the verdict
report.py         the table, the JSON cells, the merged docs page
"""
