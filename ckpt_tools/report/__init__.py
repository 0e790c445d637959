"""The report object (`model.py`: the ckpt report contract, schema_version 1) and its views, one module per output
format; renderers.py lists them. `Report` is `ckpt_tools.Report`."""
