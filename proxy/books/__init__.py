"""What a session and a tenant have spent and may still spend: the ledger, budgets and prices."""
