"""The measurement half of warpgauge: suites, providers, gates, timing, statistics, ceilings and
the runner behind ``warpgauge bench``. Data flows one way:

    suite -> providers -> gates -> timing -> stats -> artifacts -> report

Modules import torch only where they need it; importing this package does no work.
"""
