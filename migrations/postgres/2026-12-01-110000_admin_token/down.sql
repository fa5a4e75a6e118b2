DROP TABLE gateway_admin_token;
