# natserver's own release. The wire version in INFO is nats-server's (see _const.SERVER_VERSION).
__version__ = "0.1.0"
