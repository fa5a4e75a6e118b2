ALTER TABLE webhook_deliveries DROP COLUMN claim_token;
