if not live(ID) then return {'unknown_task'} end
return ok_snapshot(ID)
