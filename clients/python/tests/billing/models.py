"""The model the README's Django handler writes (clients/testing/setup.sql's invoices_paid)."""
from django.db import models


class InvoicePaid(models.Model):
    event_id = models.TextField(primary_key=True)

    class Meta:
        app_label = "billing"
        db_table = "invoices_paid"
        managed = False
