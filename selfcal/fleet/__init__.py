"""Fleets: many arms of one type as one job on Ray, each arm compared with its siblings.

``table`` reads FLEET.csv, ``archive`` moves folders as bytes, ``tasks`` is what a worker does for
one arm (selfcal's own commands), ``engine`` runs the tasks on Ray, ``records`` keeps fleet.json
and decides what ``--resume`` may keep, ``compare`` and ``selfmodels`` set each arm against its
siblings, ``report`` writes index.html, ``run`` ties them together for ``selfcal fleet``.
"""
