from gmpo_plugins.adapters.skyrl.entrypoint import main

if __name__ == "__main__":
    main()
