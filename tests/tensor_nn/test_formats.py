print('SKIP: formats: not written yet')
