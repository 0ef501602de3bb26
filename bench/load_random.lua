-- wrk script for bench/load.sh: a random announce-like URL per request (20 random bytes,
-- percent-encoded, and a random port), the same shape as onefix's template.
math.randomseed(1)
local hex = {}
for i = 0, 255 do hex[i] = string.format("%%%02X", i) end
request = function()
  local h = {}
  for i = 1, 20 do h[i] = hex[math.random(0, 255)] end
  return wrk.format(nil, "/announce?info_hash=" .. table.concat(h) .. "&port=" .. math.random(1024, 65535))
end
