from homelab.entry import main

main()
