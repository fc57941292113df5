from homelab.cli import main

main()
