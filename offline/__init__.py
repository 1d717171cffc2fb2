"""``wtwin``, the offline side: the CLI (``wtwin monitor``, ``wtwin demo``), the log
readers it shares with the daemon's web page, and ``make demo`` (``daemon_demo``).

Nothing here runs inside wtwind: the daemon imports only the log readers (``logs``)
and the preset rule (``checks.choose_preset``) for its analysis page.
"""
