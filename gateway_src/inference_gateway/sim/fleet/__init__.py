"""The fleet tier on the simulator's clock (`igw simulate FLEET-SCENARIO`): several
clusters of simulated pods (`sim/pods.py`) in several regions behind the global router.

    scenario.py  the fleet scenario files (clusters, regions, network, events)
    tier.py      the clusters and one global router per client region, on the event heap
    runner.py    one run per router profile, side by side
    report.py    what a run measured
    cli.py       the report as tables or JSON
"""
