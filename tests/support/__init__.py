"""Helpers the test suite shares: real model servers on 127.0.0.1 (`model_servers`)."""
