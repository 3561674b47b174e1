"""HC parameters counted: per site and layer (sites.py), the whole model under each convention
(model.py), and count-params' report rows (report.py)."""
