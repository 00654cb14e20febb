"""The real-time core: sessions, newest-frame mailboxes, the batch worker and the tracks that send frames out."""
