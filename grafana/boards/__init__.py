"""The dashboards' source, one module a concern: `kit` (the building blocks: targets, panels,
the grid, variables, annotations), `overview` (the overview dashboard, row by row) with
`pipeline` (its Pipeline row), and `field` (the field drill-down). `generate.py` beside this
package writes them as JSON."""
