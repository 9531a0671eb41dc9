"""The pure reconcile of a decided intent: manifests, conditions, scrape jobs and the status patch."""
