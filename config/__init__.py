"""Trainyard's Django project package. Importing it loads the Celery app so that
`@shared_task` functions bind to it in every process (web, worker, beat)."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
