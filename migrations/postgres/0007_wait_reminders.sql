-- How many of the policy's reminder points a wait has been reminded of.
ALTER TABLE waits ADD COLUMN reminders_sent BIGINT NOT NULL DEFAULT 0;
