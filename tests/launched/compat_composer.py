def run():
    return ["not written yet"]
